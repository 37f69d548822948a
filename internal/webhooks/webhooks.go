// Package webhooks validates this provider's objects at admission, with messages that say what
// is wrong and how to fix it. Template immutability skips ClusterClass topology dry-runs (SSA).
package webhooks

import (
	"context"
	"fmt"
	"net/url"
	"reflect"
	"regexp"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/cluster-api/util/topology"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	infrav1 "github.com/caprf/cluster-api-provider-redfish/api/v1alpha1"
	"github.com/caprf/cluster-api-provider-redfish/bmc"
	expv1 "github.com/caprf/cluster-api-provider-redfish/exp/api/v1alpha1"
	"github.com/caprf/cluster-api-provider-redfish/internal/claim"
	"github.com/caprf/cluster-api-provider-redfish/internal/install"
)

// Setup registers every webhook of the provider. reader reads from the API server. watchNamespace
// is the one namespace the manager's cache is restricted to ("": every namespace): with a cache of
// every namespace, a new host is looked up there by identity (HostIdentityIndex); otherwise every
// host is listed from the API server.
func Setup(ctx context.Context, mgr ctrl.Manager, reader client.Reader, watchNamespace string) error {
	hostValidator := &Host{Reader: reader}
	if watchNamespace == "" {
		if err := mgr.GetFieldIndexer().IndexField(ctx, &infrav1.RedfishHost{}, HostIdentityIndex, IndexHostIdentity); err != nil {
			return err
		}
		hostValidator.Hosts = mgr.GetCache()
	}
	if err := ctrl.NewWebhookManagedBy(mgr, &infrav1.RedfishHost{}).WithValidator(hostValidator).Complete(); err != nil {
		return err
	}
	if err := ctrl.NewWebhookManagedBy(mgr, &infrav1.RedfishMachine{}).WithValidator(&Machine{Reader: reader}).Complete(); err != nil {
		return err
	}
	if err := ctrl.NewWebhookManagedBy(mgr, &expv1.RedfishMaintenance{}).WithValidator(&Maintenance{Reader: reader}).Complete(); err != nil {
		return err
	}
	if err := ctrl.NewWebhookManagedBy(mgr, &expv1.RedfishMaintenancePolicy{}).WithValidator(&MaintenancePolicy{}).Complete(); err != nil {
		return err
	}
	if err := ctrl.NewWebhookManagedBy(mgr, &expv1.RedfishMaintenanceSet{}).WithValidator(&MaintenanceSet{}).Complete(); err != nil {
		return err
	}
	if err := ctrl.NewWebhookManagedBy(mgr, &infrav1.RedfishJob{}).WithValidator(&Job{Reader: reader}).Complete(); err != nil {
		return err
	}
	return ctrl.NewWebhookManagedBy(mgr, &infrav1.RedfishMachineTemplate{}).WithValidator(&MachineTemplate{}).Complete()
}

// +kubebuilder:webhook:path=/validate-infrastructure-cluster-x-k8s-io-v1alpha1-redfishhost,mutating=false,failurePolicy=fail,sideEffects=None,groups=infrastructure.cluster.x-k8s.io,resources=redfishhosts,verbs=create;update,versions=v1alpha1,name=validation.redfishhost.infrastructure.cluster.x-k8s.io,admissionReviewVersions=v1

// Host validates RedfishHosts.
type Host struct {
	// Reader reads from the API server.
	Reader client.Reader
	// Hosts is a cache of every namespace's RedfishHosts with HostIdentityIndex; nil: the
	// duplicate check lists every host from Reader.
	Hosts client.Reader

	recent recentHosts
}

// ValidateCreate checks the BMC address; a missing credentials Secret is only a warning (GitOps
// tools may apply the host before its Secret).
func (v *Host) ValidateCreate(ctx context.Context, h *infrav1.RedfishHost) (admission.Warnings, error) {
	return v.validate(ctx, h, checks{address: true, duplicates: true, serviceBoot: true, credentials: true})
}

// checks are the parts of validate that an update only needs when what they check changed.
type checks struct {
	// address: the BMC address parses. On an update only when it changed: a host admitted by an
	// older release, whose address this one refuses, keeps taking other updates (its finalizer's
	// removal included).
	address bool
	// duplicates: another host for the same BMC system or boot MAC (lists or reads hosts).
	duplicates bool
	// serviceBoot: the service boot's image and who may ask for it.
	serviceBoot bool
	// credentials: warn about a missing or incomplete credentials Secret (reads it from the API
	// server). On an update only when spec.bmc changed: not on the updates controllers make (a
	// finalizer, a label, a reboot request), whose warnings nobody reads; at 1000 hosts those
	// reads were a third of the Secret reads the API server served while a fleet registered.
	credentials bool
}

// ValidateUpdate checks what changed as ValidateCreate checks a new host (the identity against the
// other hosts, the service boot, the credentials Secret), and refuses to re-point a claimed host at
// another BMC: the claimed server runs a Machine, and a new address would hand that claim (and its
// power control) to whatever server answers there.
func (v *Host) ValidateUpdate(ctx context.Context, old, h *infrav1.RedfishHost) (admission.Warnings, error) {
	if c := old.Status.Claim; c != nil && old.Spec.BMC.Address != h.Spec.BMC.Address {
		return nil, apierrors.NewInvalid(infrav1.GroupVersion.WithKind("RedfishHost").GroupKind(), h.Name, field.ErrorList{
			field.Forbidden(field.NewPath("spec", "bmc", "address"), fmt.Sprintf(
				"cannot change while the host is claimed by %s %s (state %s); delete that Machine and wait until the host is Available, or register the other server as a new RedfishHost",
				c.Consumer.Kind, c.Consumer.Name, old.Status.State)),
		})
	}
	// Only a changed identity is checked against the other hosts: updates of anything else
	// (finalizers, labels, cordon) must keep working whatever was registered before.
	identityChanged := old.Spec.BMC.Address != h.Spec.BMC.Address || !strings.EqualFold(old.Spec.BootMACAddress, h.Spec.BootMACAddress)
	if rf := old.Status.ReservedFor; rf != nil && old.Spec.BMC.Address != h.Spec.BMC.Address {
		return nil, apierrors.NewInvalid(infrav1.GroupVersion.WithKind("RedfishHost").GroupKind(), h.Name, field.ErrorList{
			field.Forbidden(field.NewPath("spec", "bmc", "address"), fmt.Sprintf(
				"cannot change while the host is reserved for %s %s (nodeReuse: its disks hold that owner's node); delete the owner or wait until it takes the host back",
				rf.Kind, rf.Name)),
		})
	}
	// The service boot only when it changes: a host keeps accepting other updates (finalizers,
	// reboot requests) whatever it was given before.
	return v.validate(ctx, h, checks{
		address:     old.Spec.BMC.Address != h.Spec.BMC.Address,
		duplicates:  identityChanged,
		serviceBoot: !reflect.DeepEqual(old.Spec.ServiceBoot, h.Spec.ServiceBoot),
		credentials: !reflect.DeepEqual(old.Spec.BMC, h.Spec.BMC),
	})
}

// ValidateDelete allows every delete (a claimed host waits for its machine in its finalizer).
func (v *Host) ValidateDelete(context.Context, *infrav1.RedfishHost) (admission.Warnings, error) {
	return nil, nil
}

func (v *Host) validate(ctx context.Context, h *infrav1.RedfishHost, check checks) (admission.Warnings, error) {
	var errs field.ErrorList
	if _, err := bmc.ParseAddress(h.Spec.BMC.Address); err != nil && check.address {
		errs = append(errs, field.Invalid(field.NewPath("spec", "bmc", "address"), redactedAddress(h.Spec.BMC.Address), err.Error()))
	}
	if sb := h.Spec.ServiceBoot; sb != nil && check.serviceBoot {
		path := field.NewPath("spec", "serviceBoot")
		if u, err := url.Parse(sb.Image); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			errs = append(errs, field.Invalid(path.Child("image"), refusedURL(sb.Image), "must be an http or https URL the BMC can reach"))
		}
		// A service boot powers off whatever runs, without a drain: on a host serving a Machine
		// only a maintenance (which drained it first) may ask for one. A guard against mistakes,
		// not an access control: who may edit hosts may write any requestor.
		if c := h.Status.Claim; c != nil && !strings.HasPrefix(sb.Requestor, "maintenance/") {
			errs = append(errs, field.Forbidden(path, fmt.Sprintf("host is claimed by %s %s: a service boot would power it off without a drain; use a RedfishMaintenance with a bootImage task", c.Consumer.Kind, c.Consumer.Name)))
		}
	}
	if len(errs) == 0 && check.duplicates {
		dup, err := v.duplicates(ctx, h)
		if err != nil {
			return nil, apierrors.NewInternalError(fmt.Errorf("checking for another host with the same BMC system or boot MAC: %w", err))
		}
		errs = append(errs, dup...)
	}
	if len(errs) > 0 {
		return nil, apierrors.NewInvalid(infrav1.GroupVersion.WithKind("RedfishHost").GroupKind(), h.Name, errs)
	}
	if check.duplicates && v.Hosts != nil {
		v.recent.add(h, time.Now())
	}
	var warnings admission.Warnings
	if addr, _ := bmc.ParseAddress(h.Spec.BMC.Address); h.Spec.BMC.AuthMethod == infrav1.BMCAuthBasic && strings.HasPrefix(addr.BaseURL, "http://") {
		warnings = append(warnings, "spec.bmc.authMethod Basic over plain HTTP (redfish+http) sends the BMC password in clear with every request; use it only in a lab")
	}
	if v.Reader != nil && check.credentials {
		sec := &corev1.Secret{}
		err := v.Reader.Get(ctx, client.ObjectKey{Namespace: h.Namespace, Name: h.Spec.BMC.CredentialsName}, sec)
		switch {
		case apierrors.IsNotFound(err):
			warnings = append(warnings, fmt.Sprintf("credentials Secret %s does not exist yet; the host waits in Registering until it does", h.Spec.BMC.CredentialsName))
		case err == nil && sec.Labels[infrav1.BMCCredentialsLabel] != "true":
			return warnings, apierrors.NewInvalid(infrav1.GroupVersion.WithKind("RedfishHost").GroupKind(), h.Name, field.ErrorList{
				field.Forbidden(field.NewPath("spec", "bmc", "credentialsName"), fmt.Sprintf(
					"Secret %s lacks the label %s: \"true\"; label the Secret that holds this BMC's username and password (only such Secrets are sent to BMCs)",
					h.Spec.BMC.CredentialsName, infrav1.BMCCredentialsLabel)),
			})
		case err == nil && (len(sec.Data["username"]) == 0 || len(sec.Data["password"]) == 0):
			warnings = append(warnings, fmt.Sprintf("credentials Secret %s needs non-empty keys \"username\" and \"password\"", h.Spec.BMC.CredentialsName))
		}
	}
	return warnings, nil
}

// duplicates refuses a host whose BMC system or boot MAC another RedfishHost (in any namespace)
// already has: two hosts for one server defeat exclusive claims (both can be claimed, and each
// claim powers the same server) and make the BMC client pool swap back and forth.
func (v *Host) duplicates(ctx context.Context, h *infrav1.RedfishHost) (field.ErrorList, error) {
	if v.Reader == nil {
		return nil, nil
	}
	mine, err := bmc.ParseAddress(h.Spec.BMC.Address)
	if err != nil {
		return nil, nil // reported by the caller
	}
	others, err := v.others(ctx, h)
	if err != nil {
		return nil, err
	}
	var errs field.ErrorList
	mac := strings.ToLower(h.Spec.BootMACAddress)
	for i := range others {
		o := &others[i]
		if o.Namespace == h.Namespace && o.Name == h.Name {
			continue
		}
		other := o.Namespace + "/" + o.Name
		if theirs, err := bmc.ParseAddress(o.Spec.BMC.Address); err == nil && sameSystem(mine, theirs) {
			errs = append(errs, field.Invalid(field.NewPath("spec", "bmc", "address"), redactedAddress(h.Spec.BMC.Address),
				"RedfishHost "+other+" already manages this BMC system ("+theirs.BaseURL+theirs.SystemPath+"); one server is registered once"))
		}
		if mac != "" && strings.ToLower(o.Spec.BootMACAddress) == mac {
			errs = append(errs, field.Invalid(field.NewPath("spec", "bootMACAddress"), h.Spec.BootMACAddress,
				"RedfishHost "+other+" already boots from this MAC; one server is registered once"))
		}
	}
	return errs, nil
}

// sameSystem says whether two addresses reach the same system: the same Redfish service and the
// same system path, or one of them without a path (the BMC's only system, discovered).
func sameSystem(a, b bmc.Address) bool {
	return a.BaseURL == b.BaseURL && (a.SystemPath == "" || b.SystemPath == "" || a.SystemPath == b.SystemPath)
}

// refusedURL is how a refused URL is quoted back: redacted, and with nothing between its scheme
// and its last '@' (a URL typed without "//", admin:pw@host/x.iso, or with a '/' in its password,
// is no URL whose userinfo the redaction would find). The scheme stays: it is often what was wrong.
func refusedURL(s string) string {
	if i := strings.LastIndex(s, "@"); i >= 0 {
		scheme := urlScheme.FindString(s[:i])
		s = scheme + "REDACTED" + s[i:]
	}
	return bmc.Redact(s)
}

// urlScheme is a URL's scheme with its "//", as typed.
var urlScheme = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*:(//)?`)

// refusedChecksum quotes a refused checksum: a digest as it is (no secret, and what the
// operator must compare), anything else as a refused URL.
func refusedChecksum(s string) string {
	if strings.Trim(strings.ToLower(s), "0123456789abcdef") == "" {
		return s
	}
	return refusedURL(s)
}

// redactedAddress never echoes credentials typed into the URL: neither the password nor the
// username.
func redactedAddress(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(unparseable)"
	}
	return bmc.RedactAddress(u)
}

// +kubebuilder:webhook:path=/validate-infrastructure-cluster-x-k8s-io-v1alpha1-redfishmachine,mutating=false,failurePolicy=fail,sideEffects=None,groups=infrastructure.cluster.x-k8s.io,resources=redfishmachines,verbs=create;update,versions=v1alpha1,name=validation.redfishmachine.infrastructure.cluster.x-k8s.io,admissionReviewVersions=v1

// Machine validates RedfishMachines: a valid spec, immutable once created except the providerID
// the controller sets and the maintenance approvals of the cluster owner (which must name an
// existing maintenance by name and UID).
type Machine struct {
	Reader client.Reader
}

// ValidateCreate checks the spec.
// (Approvals are checked when they are added to an existing RedfishMachine: one recreated by a
// move or a restore keeps the approvals it had, which approve nothing once their UIDs are gone.)
// A providerID on a new RedfishMachine is only the restore path (`clusterctl move`, a backup):
// it must name a host of the namespace whose claim record names this machine. Anything else
// would let a machine take a host (reserved, or with another tenant's disks) without a claim.
// A host that does not exist (yet: a restore may recreate machines first) is only warned about:
// whenever it comes, it restores the claim only if its record names this machine.
func (v *Machine) ValidateCreate(ctx context.Context, m *infrav1.RedfishMachine) (admission.Warnings, error) {
	errs := validateSpec(&m.Spec, field.NewPath("spec"))
	var warnings admission.Warnings
	if m.Spec.ProviderID != "" {
		var more field.ErrorList
		warnings, more = v.restorable(ctx, m)
		errs = append(errs, more...)
	}
	return warnings, invalid("RedfishMachine", m.Name, errs)
}

// restorable checks that a new machine's providerID names a host that records this machine's
// claim.
func (v *Machine) restorable(ctx context.Context, m *infrav1.RedfishMachine) (admission.Warnings, field.ErrorList) {
	path := field.NewPath("spec", "providerID")
	name := claim.HostOf(m.Spec.ProviderID, m.Namespace)
	if name == "" {
		return nil, field.ErrorList{field.Invalid(path, refusedURL(m.Spec.ProviderID), "is set by the controller once a host is claimed; leave it empty (it must name a RedfishHost of namespace "+m.Namespace+")")}
	}
	if v.Reader == nil {
		return nil, nil
	}
	h := &infrav1.RedfishHost{}
	err := v.Reader.Get(ctx, client.ObjectKey{Namespace: m.Namespace, Name: name}, h)
	switch {
	case apierrors.IsNotFound(err):
		return admission.Warnings{fmt.Sprintf("spec.providerID names RedfishHost %s, which does not exist yet; the machine waits for it, and it restores the claim only if its record names this machine", name)}, nil
	case err != nil:
		return nil, field.ErrorList{field.InternalError(path, fmt.Errorf("reading RedfishHost %s: %w", name, err))}
	case h.Annotations[infrav1.HostClaimedByAnnotation] == "" && h.Annotations[infrav1.HostReservedForAnnotation] == "" &&
		(h.Status.State == "" || h.Status.State == infrav1.HostStateRegistering || h.Status.State == infrav1.HostStateInspecting):
		// Recreated moments ago without a record: moved from a release before hosts recorded
		// their claims. The machine is admitted and waits; the host restores nothing.
		return admission.Warnings{fmt.Sprintf("spec.providerID names RedfishHost %s, which carries no claim record (moved or restored from an older release?); it will not restore this machine's claim", name)}, nil
	case h.Annotations[infrav1.HostClaimedByAnnotation] != m.Name:
		return nil, field.ErrorList{field.Forbidden(path, fmt.Sprintf("names RedfishHost %s, whose claim record (annotation %s) does not name this machine; a providerID is set by the controller, leave it empty", name, infrav1.HostClaimedByAnnotation))}
	}
	return nil, nil
}

// ValidateUpdate refuses changes to the spec other than setting the providerID and approving
// maintenances.
func (v *Machine) ValidateUpdate(ctx context.Context, old, m *infrav1.RedfishMachine) (admission.Warnings, error) {
	errs := validateSpec(&m.Spec, field.NewPath("spec"))
	if equality.Semantic.DeepEqual(old.Spec.Image, m.Spec.Image) {
		// An image admitted before these checks existed (a raw image without a checksum) must not
		// block the updates a machine gets (its providerID, maintenance approvals).
		errs = withoutImageErrors(errs)
	}
	errs = append(errs, approvalsExist(ctx, v.Reader, old, m)...)
	before, after := old.Spec.DeepCopy(), m.Spec.DeepCopy()
	if before.ProviderID == "" {
		before.ProviderID = after.ProviderID
	}
	before.MaintenanceApprovals = after.MaintenanceApprovals // the cluster owner's answer to announcements
	if !equality.Semantic.DeepEqual(before, after) {
		errs = append(errs, field.Forbidden(field.NewPath("spec"), "is immutable once created (only providerID is set, by the controller); change the MachineDeployment's template instead"))
	}
	return nil, invalid("RedfishMachine", m.Name, errs)
}

// ValidateDelete allows every delete.
func (*Machine) ValidateDelete(context.Context, *infrav1.RedfishMachine) (admission.Warnings, error) {
	return nil, nil
}

// +kubebuilder:webhook:path=/validate-infrastructure-cluster-x-k8s-io-v1alpha1-redfishmachinetemplate,mutating=false,failurePolicy=fail,sideEffects=None,groups=infrastructure.cluster.x-k8s.io,resources=redfishmachinetemplates,verbs=create;update,versions=v1alpha1,name=validation.redfishmachinetemplate.infrastructure.cluster.x-k8s.io,admissionReviewVersions=v1

// MachineTemplate validates RedfishMachineTemplates: a valid spec, immutable (CAPI rolls out by
// switching templates), except in the dry-run requests of ClusterClass topology reconciliation.
type MachineTemplate struct{}

// ValidateCreate checks the template's machine spec.
func (*MachineTemplate) ValidateCreate(_ context.Context, t *infrav1.RedfishMachineTemplate) (admission.Warnings, error) {
	return nil, invalid("RedfishMachineTemplate", t.Name, validateTemplate(t))
}

// validateTemplate checks a template's machine spec; approvals have no place there (every
// Machine cloned from it would carry them).
func validateTemplate(t *infrav1.RedfishMachineTemplate) field.ErrorList {
	path := field.NewPath("spec", "template", "spec")
	errs := validateSpec(&t.Spec.Template.Spec, path)
	if t.Spec.Template.Spec.ProviderID != "" {
		errs = append(errs, field.Forbidden(path.Child("providerID"), "is set by the controller on each machine once it claims a host; a template names no host"))
	}
	if len(t.Spec.Template.Spec.MaintenanceApprovals) > 0 {
		errs = append(errs, field.Forbidden(path.Child("maintenanceApprovals"), "approvals are given on a RedfishMachine, for the maintenance announced in its status"))
	}
	return errs
}

// ValidateUpdate refuses spec changes, unless the request is a topology dry-run.
func (*MachineTemplate) ValidateUpdate(ctx context.Context, old, t *infrav1.RedfishMachineTemplate) (admission.Warnings, error) {
	path := field.NewPath("spec", "template", "spec")
	errs := validateTemplate(t)
	if equality.Semantic.DeepEqual(old.Spec.Template.Spec.Image, t.Spec.Template.Spec.Image) {
		errs = withoutImageErrors(errs) // admitted before these checks existed: left as it is
	}
	req, err := admission.RequestFromContext(ctx)
	if err != nil {
		return nil, apierrors.NewBadRequest(err.Error())
	}
	if !topology.IsDryRunRequest(req, t) && !equality.Semantic.DeepEqual(old.Spec, t.Spec) {
		errs = append(errs, field.Forbidden(path, "RedfishMachineTemplate spec is immutable: create a new template and point the MachineDeployment at it"))
	}
	return nil, invalid("RedfishMachineTemplate", t.Name, errs)
}

// ValidateDelete allows every delete: machines never read their template back.
func (*MachineTemplate) ValidateDelete(context.Context, *infrav1.RedfishMachineTemplate) (admission.Warnings, error) {
	return nil, nil
}

func validateSpec(s *infrav1.RedfishMachineSpec, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	if s.HostSelector != nil {
		if _, err := metav1.LabelSelectorAsSelector(s.HostSelector); err != nil {
			errs = append(errs, field.Invalid(path.Child("hostSelector"), s.HostSelector, err.Error()))
		}
	}
	img := s.Image
	if img == nil {
		return append(errs, field.Required(path.Child("image"), "the image to provision hosts with"))
	}
	if u, err := url.Parse(img.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		errs = append(errs, field.Invalid(path.Child("image", "url"), refusedURL(img.URL), "must be an http:// or https:// URL with a host"))
	}
	return append(errs, validateImage(img, s.BootMethod, path.Child("image"))...)
}

// validateImage refuses an image whose format is unknown or contradicts its URL (it would be
// booted as a CD and never start), a disk image without a checksum, and a checksum nobody checks.
func validateImage(img *infrav1.Image, boot infrav1.BootMethod, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	format, byURL := img.EffectiveFormat(), infrav1.FormatOfURL(img.URL)
	switch {
	case format == "":
		return append(errs, field.Required(path.Child("format"), "the URL's file name names no format (.raw, .qcow2, .iso; .img is either raw or qcow2): say which it is, raw, qcow2, iso or live-iso (a compressed image must be decompressed first)"))
	case img.Format != "" && byURL != "" && (byURL.DiskImage() != format.DiskImage() || (format.DiskImage() && byURL != format)):
		errs = append(errs, field.Invalid(path.Child("format"), format, fmt.Sprintf("the URL names a %s image; a %s image would not boot: set the format the file has", byURL, format)))
	}
	if format.DiskImage() {
		switch {
		case img.Checksum == "":
			errs = append(errs, field.Required(path.Child("checksum"), fmt.Sprintf("a %s image is written to the host's drive only once its checksum is verified: give its %s digest, or the URL of a checksum file", format, img.EffectiveChecksumType())))
		case install.IsChecksumURL(img.Checksum):
			if u, err := url.Parse(img.Checksum); err != nil || u.Host == "" {
				errs = append(errs, field.Invalid(path.Child("checksum"), refusedURL(img.Checksum), "must be a hex digest or an http(s) URL with a host"))
			}
		case !install.ValidDigest(img.Checksum, img.EffectiveChecksumType()):
			errs = append(errs, field.Invalid(path.Child("checksum"), refusedChecksum(img.Checksum), fmt.Sprintf("is not a %s digest (%d hex digits) nor an http(s) URL of a checksum file", img.EffectiveChecksumType(), map[infrav1.ChecksumType]int{infrav1.ChecksumSHA256: 64, infrav1.ChecksumSHA512: 128}[img.EffectiveChecksumType()])))
		}
	} else {
		if img.Checksum != "" || img.ChecksumType != "" {
			errs = append(errs, field.Forbidden(path.Child("checksum"), fmt.Sprintf("is verified only for raw and qcow2 images, which the deploy image writes; a %s image is booted as the BMC reads it", format)))
		}
		if img.CABundleName != "" {
			errs = append(errs, field.Forbidden(path.Child("caBundleName"), "is used by the deploy image, which downloads raw and qcow2 images only"))
		}
	}
	if format.InstallsToDisk() && boot != "" && boot != infrav1.BootMethodVirtualMedia {
		errs = append(errs, field.Forbidden(path.Child("format"), fmt.Sprintf("a %s image is installed to disk from virtual media (the deploy image or the installer, with a seed volume); bootMethod %s is not supported for it yet: use VirtualMedia, or a live-iso image", format, boot)))
	}
	return errs
}

// withoutImageErrors drops the errors about the image's format, checksum and CA bundle.
func withoutImageErrors(errs field.ErrorList) field.ErrorList {
	var out field.ErrorList
	for _, e := range errs {
		if strings.Contains(e.Field, ".image.format") || strings.Contains(e.Field, ".image.checksum") || strings.Contains(e.Field, ".image.caBundleName") {
			continue
		}
		out = append(out, e)
	}
	return out
}

func invalid(kind, name string, errs field.ErrorList) error {
	if len(errs) == 0 {
		return nil
	}
	return apierrors.NewInvalid(infrav1.GroupVersion.WithKind(kind).GroupKind(), name, errs)
}
