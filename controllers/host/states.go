package host

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/cluster-api/util"
	"sigs.k8s.io/cluster-api/util/annotations"
	"sigs.k8s.io/cluster-api/util/conditions"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/caprf/cluster-api-provider-redfish/api/v1alpha1"
	"github.com/caprf/cluster-api-provider-redfish/bmc"
	"github.com/caprf/cluster-api-provider-redfish/internal/claim"
	"github.com/caprf/cluster-api-provider-redfish/internal/seed"
)

type stateHandler func(context.Context, *scope) (ctrl.Result, error)

func (r *Reconciler) handlers() map[infrav1.HostState]stateHandler {
	return map[infrav1.HostState]stateHandler{
		infrav1.HostStateRegistering:    r.register,
		infrav1.HostStateError:          r.register,
		infrav1.HostStateInspecting:     r.inspect,
		infrav1.HostStateAvailable:      r.available,
		infrav1.HostStateProvisioning:   r.provision,
		infrav1.HostStateProvisioned:    r.provisioned,
		infrav1.HostStateDeprovisioning: r.deprovision,
		infrav1.HostStateCleaning:       r.clean,
	}
}

// connectOrWait connects to the BMC; when that fails the host keeps its state (a claimed host
// does not lose its claim because its BMC is briefly down) and is retried later.
func (r *Reconciler) connectOrWait(ctx context.Context, s *scope) (ctrl.Result, bool) {
	if s.bmc != nil {
		return ctrl.Result{}, true // connected earlier in this round, by the state before
	}
	if err := r.connect(ctx, s); err != nil {
		if !errors.Is(err, bmc.ErrConnecting) {
			ctrl.LoggerFrom(ctx).Info("BMC not usable, will retry", "reason", conditions.GetReason(s.host, infrav1.BMCReachableCondition), "error", err.Error())
		}
		return ctrl.Result{RequeueAfter: r.retryAfter(err)}, false
	}
	return ctrl.Result{}, true
}

func (r *Reconciler) register(ctx context.Context, s *scope) (ctrl.Result, error) {
	h := s.host
	if err := r.connect(ctx, s); err != nil {
		if !errors.Is(err, bmc.ErrConnecting) && conditions.GetReason(h, infrav1.BMCReachableCondition) == infrav1.BMCAddressInvalidReason {
			h.Status.State = infrav1.HostStateError // waits for a spec change
			return ctrl.Result{}, nil
		}
		h.Status.State = infrav1.HostStateRegistering
		return ctrl.Result{RequeueAfter: r.retryAfter(err)}, nil
	}
	h.Status.State = infrav1.HostStateInspecting
	h.Status.RegisteredAddress = h.Spec.BMC.Address
	// Told with the inspection, in the same round: one status write and one event for both.
	s.registered = fmt.Sprintf("BMC %s answered with the given credentials", h.Spec.BMC.Address)
	return r.inspect(ctx, s)
}

func (r *Reconciler) inspect(ctx context.Context, s *scope) (ctrl.Result, error) {
	if s.bmc == nil { // connected already when registered this round
		if res, ok := r.connectOrWait(ctx, s); !ok {
			return res, nil
		}
	}
	h := s.host
	if h.Status.Inventory == nil || h.Status.RestoreWaitSince == nil {
		inv, err := s.bmc.Inventory(ctx)
		if err != nil {
			if s.registered != "" {
				r.event(h, "Registered", "Register", "%s", s.registered)
			}
			conditions.Set(h, metav1.Condition{Type: infrav1.InspectedCondition, Status: metav1.ConditionFalse, Reason: "InspectionFailed", Message: err.Error()})
			return ctrl.Result{RequeueAfter: r.RetryInterval}, nil
		}
		h.Status.Inventory = inv
		conditions.Set(h, metav1.Condition{Type: infrav1.InspectedCondition, Status: metav1.ConditionTrue, Reason: "Inspected"})
		found := fmt.Sprintf("%s %s, %d cores, %d MiB, %d NICs, %d drives", inv.Manufacturer, inv.Model, inv.CPUCores, inv.MemoryMiB, len(inv.NICs), len(inv.Drives))
		if s.registered != "" {
			r.event(h, "Registered", "Register", "%s; inspected: %s", s.registered, found)
		} else {
			r.event(h, "Inspected", "Inspect", "%s", found)
		}
	}
	restored, err := r.restoreClaim(ctx, h, true)
	if err != nil {
		return ctrl.Result{}, err
	}
	if restored {
		h.Status.RestoreWaitSince = nil
		return ctrl.Result{}, nil
	}
	if name := recordedConsumer(h); name != "" {
		// Recreated without status while claimed (a move, a restore, its machine being deleted
		// meanwhile): its disks hold that machine's data. It waits for the machine, then is
		// powered off and cleaned: never offered as it is.
		wait := r.holdForRecordedMachine(h, name)
		if wait == 0 && r.clusterPaused(ctx, h.Namespace, h.Annotations[infrav1.HostClaimedClusterAnnotation]) {
			// clusterctl move pauses the Cluster until everything is moved: no deadline then.
			wait = r.PollInterval
		}
		if wait > 0 {
			return ctrl.Result{RequeueAfter: wait}, nil
		}
		h.Status.RestoreWaitSince = nil
		h.Status.State = infrav1.HostStateDeprovisioning
		r.event(h, "CleaningUnclaimed", "Inspect", "its record names RedfishMachine %s, which did not come back within %s: powering off and erasing before the host is offered", name, r.RestoreGracePeriod)
		return ctrl.Result{}, nil // the status change wakes the next state
	}
	if v, ok := h.Annotations[infrav1.HostReservedForAnnotation]; ok && h.Status.ReservedFor == nil {
		ref := recordedReservation(h)
		if ref == nil {
			// A record that cannot be read fails closed: the host may hold an owner's node.
			h.Status.State = infrav1.HostStateDeprovisioning
			r.event(h, "CleaningUnclaimed", "Inspect", "its reservation record %q cannot be read: erasing before the host is offered", v)
			return ctrl.Result{}, nil
		}
		// Restored as reserved, and uncleaned: if that owner is gone, the host is erased
		// before anyone else can claim it (see dropStaleReservation).
		h.Status.ReservedFor = ref
		r.event(h, "ReservationRestored", "Inspect", "restored the reservation for %s %s from its record", ref.Kind, ref.Name)
	}
	if wait := r.holdForRestore(h, s.power); wait > 0 {
		return ctrl.Result{RequeueAfter: wait}, nil
	}
	h.Status.State = infrav1.HostStateAvailable
	return ctrl.Result{}, nil // the status change wakes the next state
}

// holdForRecordedMachine keeps a host whose record names a machine out of the pool for
// RestoreGracePeriod, whatever its power, while that machine may still be recreated. It returns
// how soon to look again (0: the grace period is over).
func (r *Reconciler) holdForRecordedMachine(h *infrav1.RedfishHost, name string) time.Duration {
	if h.Status.RestoreWaitSince == nil {
		now := metav1.NewTime(r.now())
		h.Status.RestoreWaitSince = &now
		r.event(h, "WaitingForRestore", "Inspect", "its record names RedfishMachine %s: not offered for %s, in case that machine is being recreated (clusterctl move, a restore)", name, r.RestoreGracePeriod)
	}
	if left := r.RestoreGracePeriod - r.now().Sub(h.Status.RestoreWaitSince.Time); left > 0 {
		return min(left, r.PollInterval)
	}
	return 0
}

// holdForRestore keeps an unclaimed host that inspection found powered on out of the pool for
// RestoreGracePeriod: it may run a machine whose objects `clusterctl move` or a restore has not
// recreated yet, and another machine's claim would power it off. It returns how soon to look
// again for the machine (0: offer the host now).
func (r *Reconciler) holdForRestore(h *infrav1.RedfishHost, power bmc.PowerState) time.Duration {
	if power != bmc.PowerOn && power != bmc.PowerPoweringOn {
		h.Status.RestoreWaitSince = nil
		return 0
	}
	if h.Status.RestoreWaitSince == nil {
		now := metav1.Now()
		h.Status.RestoreWaitSince = &now
		r.event(h, "WaitingForRestore", "Inspect", "powered on and claimed by no machine: not offered for %s, in case its machine is being recreated (clusterctl move, a restore)", r.RestoreGracePeriod)
	}
	if time.Since(h.Status.RestoreWaitSince.Time) < r.RestoreGracePeriod {
		return r.PollInterval
	}
	h.Status.RestoreWaitSince = nil
	return 0
}

// restoreClaim rebuilds the claim of a host that lost its status while a machine still runs on it
// (`clusterctl move` and restored backups recreate objects without status): a RedfishMachine whose
// spec.providerID names this host is its consumer. The host goes straight to Provisioned, so it
// is neither offered to other machines nor booted again. True when a claim was restored. The host
// controller is the only writer of restored claims; the machine waits for it.
//
// Inspection reads the machines from the API server (a machine the cache has not seen yet would
// leave a running host to be offered, and powered off by another claim); an Available host reads
// the cache, through the providerID index, and is woken by the machine's appearance.
func (r *Reconciler) restoreClaim(ctx context.Context, h *infrav1.RedfishHost, fromAPIServer bool) (bool, error) {
	if h.Status.Claim != nil {
		return false, nil
	}
	rms := &infrav1.RedfishMachineList{}
	var err error
	if fromAPIServer {
		err = r.APIReader.List(ctx, rms, client.InNamespace(h.Namespace))
	} else {
		err = r.Client.List(ctx, rms, client.InNamespace(h.Namespace), client.MatchingFields{ProviderIDHostIndex: h.Name})
	}
	if err != nil {
		return false, err
	}
	for i := range rms.Items {
		rm := &rms.Items[i]
		// Only the machine the host's record names: a providerID is anyone's to write, and a host
		// without a record (a new server, or one released) restores no claim.
		if claim.HostOf(rm.Spec.ProviderID, h.Namespace) != h.Name || recordedConsumer(h) != rm.Name || !rm.DeletionTimestamp.IsZero() {
			continue
		}
		m, err := util.GetOwnerMachine(ctx, r.Client, rm.ObjectMeta)
		if err != nil {
			return false, fmt.Errorf("restoring the claim of %s: reading its Machine: %w", rm.Name, err)
		}
		if m == nil {
			return false, fmt.Errorf("restoring the claim of %s: its Machine is not readable yet", rm.Name)
		}
		cluster, err := util.GetClusterFromMetadata(ctx, r.Client, m.ObjectMeta)
		if err != nil {
			return false, fmt.Errorf("restoring the claim of %s: %w", rm.Name, err)
		}
		restored := h.DeepCopy()
		restored.Status.Claim = claim.For(rm, claim.Owner(m, cluster))
		restored.Status.Claim.Provisioned = true
		restored.Status.ReservedFor = nil
		restored.Status.State = infrav1.HostStateProvisioned
		// Written at once with the resourceVersion read, as claims are: a machine that claimed
		// the host meanwhile wins, and this reconcile starts over (the conflict requeues it).
		if err := r.Client.Status().Update(ctx, restored); err != nil {
			return false, fmt.Errorf("restoring the claim of %s: %w", rm.Name, err)
		}
		// The reconcile's patch then carries the same claim again (a no-op); it keeps the
		// resourceVersion it started from, as the round's write (internal/onepatch) diffs
		// against that: another version would be written, as a lock.
		rv := h.ResourceVersion
		*h = *restored
		h.ResourceVersion = rv
		r.event(h, infrav1.ClaimRestoredReason, "Claim", "restored the claim of RedfishMachine %s from its spec.providerID", rm.Name)
		return true, nil
	}
	return false, nil
}

func (r *Reconciler) available(ctx context.Context, s *scope) (ctrl.Result, error) {
	h := s.host
	if c := h.Status.Claim; c != nil {
		// A claim (or a claim already released) moves the host to acting on its BMC, unless a
		// RedfishJob uses the BMC: the host stays Available until the job ends, which wakes it.
		// The API server says so, every round: a job that started just before the claim may not
		// be in the cache yet (its start, confirmed against the host, did not see the claim).
		if !c.Provisioned || c.Release {
			if running, err := r.jobRunningNow(ctx, h, claimWork(c)); err != nil || running {
				return ctrl.Result{RequeueAfter: r.CheckInterval}, err
			}
		}
		switch {
		case c.Release:
			h.Status.State = infrav1.HostStateDeprovisioning
		case c.Provisioned:
			// A provisioned claim on an Available host (its status was lost and the claim
			// written back): it already runs that machine, so it must not boot again.
			h.Status.State = infrav1.HostStateProvisioned
		default:
			h.Status.State = infrav1.HostStateProvisioning
		}
		conditions.Delete(h, infrav1.CleanedCondition) // of the previous release
		r.event(h, "Claimed", "Claim", "claimed by %s %s", c.Consumer.Kind, c.Consumer.Name)
		if h.Status.State != infrav1.HostStateProvisioning {
			return ctrl.Result{}, nil // the status change wakes the next state
		}
		// Provisioning starts in this round (the claim is stored; the boot is recorded before the
		// power-on, in any case).
		return r.provision(ctx, s)
	}
	if restored, err := r.restoreClaim(ctx, h, false); err != nil || restored {
		return ctrl.Result{}, err // the status change wakes the next state
	}
	if r.dropStaleReservation(ctx, h) && !conditions.Has(h, infrav1.CleanedCondition) {
		// Released without cleaning (nodeReuse, or a maintenance in mode Reuse) for an owner that
		// is gone: its data is erased before any other owner can claim the host.
		h.Status.State = infrav1.HostStateCleaning
		r.event(h, "Cleaning", "Release", "released uncleaned for an owner that no longer exists: erasing before the host is offered again")
		return ctrl.Result{}, nil // the status change wakes the next state
	}
	if res, ok := r.connectOrWait(ctx, s); !ok {
		return res, nil
	}
	if handled, res, err := r.serviceBoot(ctx, s); handled || err != nil {
		return res, err
	}
	want := h.Spec.Online
	if len(h.Spec.RebootRequests) > 0 {
		want = new(bool)
	}
	if err := r.keepPower(ctx, s, want); err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{RequeueAfter: r.CheckInterval}, nil
}

// dropStaleReservation frees a nodeReuse reservation whose owner no longer exists, and says
// whether it did.
func (r *Reconciler) dropStaleReservation(ctx context.Context, h *infrav1.RedfishHost) bool {
	ref := h.Status.ReservedFor
	if ref == nil {
		return false
	}
	// Metadata only, read straight from the API server: no informer for an arbitrary owner kind.
	owner := &metav1.PartialObjectMetadata{}
	owner.SetGroupVersionKind(schema.GroupVersionKind{Group: ref.APIGroup, Version: "v1beta2", Kind: ref.Kind})
	err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}, owner)
	if apierrors.IsNotFound(err) {
		r.event(h, "ReservationDropped", "Release", "%s %s no longer exists", ref.Kind, ref.Name)
		h.Status.ReservedFor = nil
		return true
	}
	if err != nil {
		// Keep the reservation when the owner cannot be read (e.g. no RBAC for its kind): a
		// reserved host is never lost, only not reused by others.
		ctrl.LoggerFrom(ctx).Info("cannot check the owner of a reservation; keeping it", "owner", ref.Kind+"/"+ref.Name, "error", err.Error())
	}
	return false
}

// keepPower moves the power state read by connect to want, when set. Power-off is graceful unless
// a Hard reboot request asks otherwise.
func (r *Reconciler) keepPower(ctx context.Context, s *scope, want *bool) error {
	h := s.host
	ps := s.power
	if want == nil || *want || ps == bmc.PowerOff {
		h.Status.SoftPowerOffSentAt = nil // no power-off under way
	}
	if want == nil {
		return nil
	}
	// A RedfishJob using the BMC holds the power action, if one is due.
	held := func(what string) (bool, error) { return r.jobRunning(ctx, s.host, what) }
	switch {
	case *want && ps == bmc.PowerOff:
		if running, err := held("power-on"); err != nil || running {
			return err
		}
		r.event(h, "PowerOn", "Power", "powering on")
		return ignoreConflict(r.reset(ctx, s, bmc.ResetOn))
	case !*want && ps == bmc.PowerOn:
		t := bmc.ResetGracefulShutdown
		for _, rr := range h.Spec.RebootRequests {
			if rr.Mode == infrav1.RebootModeHard {
				t = bmc.ResetForceOff
			}
		}
		if running, err := held("power-off"); err != nil || running {
			return err
		}
		if t == bmc.ResetGracefulShutdown {
			if sent := h.Status.SoftPowerOffSentAt; sent != nil {
				if r.now().Sub(sent.Time) < r.SoftPowerOffTimeout {
					return nil // pressed once: the OS is shutting down
				}
				t = bmc.ResetForceOff
				r.event(h, "PowerOffForced", "Power", "still on %s after the power button was pressed: forcing off", r.SoftPowerOffTimeout)
			} else {
				// Recorded before the press: whatever happens to its answer, it is not pressed again.
				now := metav1.NewTime(r.now())
				h.Status.SoftPowerOffSentAt = &now
				if err := s.store(); err != nil {
					// Not known to be stored, and not pressed: the round's closing write must not
					// record a press that was never made.
					h.Status.SoftPowerOffSentAt = nil
					return err
				}
			}
		}
		r.event(h, "PowerOff", "Power", "powering off (%s)", t)
		err := r.reset(ctx, s, t)
		switch {
		case t != bmc.ResetGracefulShutdown || err == nil:
		case errors.Is(err, bmc.ErrNotSupported) || bmc.IsUnsupported(err):
			// The BMC has no GracefulShutdown (not in its allowable values, or refused as
			// unsupported): pressing it again changes nothing, so the server is forced off now.
			h.Status.SoftPowerOffSentAt = nil
			r.event(h, "PowerOffForced", "Power", "the BMC offers no GracefulShutdown (%s): forcing off", err)
			err = r.reset(ctx, s, bmc.ResetForceOff)
		case errors.Is(err, bmc.ErrConflict):
			h.Status.SoftPowerOffSentAt = nil // busy (409), not carried out: pressed again next round
		}
		// Any other refusal keeps the record: not pressed again, forced off at the timeout.
		return ignoreConflict(err)
	}
	return nil
}

// ignoreConflict treats a 409 (a transition in progress) as "try again next round".
func ignoreConflict(err error) error {
	if errors.Is(err, bmc.ErrConflict) {
		return nil
	}
	return err
}

// provision boots the claimed image: power off, set media or boot override, power on once. The
// boot is recorded in status.bootIssuedAt and never sent again for this claim.
func (r *Reconciler) provision(ctx context.Context, s *scope) (ctrl.Result, error) {
	h := s.host
	c := h.Status.Claim
	switch {
	case c == nil:
		h.Status.State = infrav1.HostStateAvailable
		return ctrl.Result{}, nil // the status change wakes the next state
	case c.Release:
		h.Status.State = infrav1.HostStateDeprovisioning
		return ctrl.Result{}, nil // the status change wakes the next state
	}
	if res, ok := r.connectOrWait(ctx, s); !ok {
		return res, nil
	}
	if c.Provisioned {
		if c.BootMethod != infrav1.BootMethodPXE {
			// The seed volume (and a live OS image) leave once the Node joined: the seed server
			// no longer serves them. A live image is attached again for each later power-on the
			// provider sends (see prepareLiveBoot).
			if err := s.bmc.EjectMedia(ctx, r.seedMediaMatch(h)); err != nil {
				return ctrl.Result{}, err
			}
		}
		h.Status.State = infrav1.HostStateProvisioned
		r.event(h, "Provisioned", "Provision", "%s %s joined its cluster", c.Consumer.Kind, c.Consumer.Name)
		return ctrl.Result{}, nil // the status change wakes the next state
	}
	if len(h.Spec.RebootRequests) > 0 && s.power == bmc.PowerOff {
		// A reboot request (a maintenance, a remediation, an operator) holds the power off: the
		// claim's boot waits until the last one is gone, and nothing is powered on meanwhile.
		r.event(h, "BootHeld", "Provision", "the boot for %s %s waits: %s", c.Consumer.Kind, c.Consumer.Name, requestors(h))
		return ctrl.Result{RequeueAfter: r.CheckInterval}, nil // the requests' removal (a spec change) wakes the host
	}
	if h.Status.BootIssuedAt != nil {
		return r.powerOnOnce(ctx, s)
	}
	toDisk := c.Image.EffectiveFormat().InstallsToDisk()
	if ps := s.power; ps != bmc.PowerOff && (!toDisk || installed(h)) {
		return ctrl.Result{RequeueAfter: r.PollInterval}, ignoreConflict(r.reset(ctx, s, bmc.ResetForceOff))
	}

	sec := &corev1.Secret{}
	if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: h.Namespace, Name: seed.SecretName(c.Consumer.Name)}, sec); err != nil {
		if apierrors.IsNotFound(err) {
			return ctrl.Result{RequeueAfter: r.PollInterval}, nil // the machine controller writes it
		}
		return ctrl.Result{}, err
	}
	if toDisk && !installed(h) {
		return r.install(ctx, s, sec)
	}
	prepared, err := r.prepareBoot(ctx, s, sec)
	if errors.Is(err, bmc.ErrNoSeedSlot) {
		conditions.Set(h, metav1.Condition{Type: infrav1.BootPreparedCondition, Status: metav1.ConditionFalse, Reason: infrav1.NoSeedMediaSlotReason, Message: noSeedSlotMessage(c)})
		return ctrl.Result{RequeueAfter: r.RetryInterval}, nil
	}
	if errors.Is(err, bmc.ErrConflict) {
		// Busy (a power transition, POST): said in the condition, and prepared again next round.
		conditions.Set(h, metav1.Condition{Type: infrav1.BootPreparedCondition, Status: metav1.ConditionFalse, Reason: infrav1.BMCBusyReason, Message: err.Error()})
		return ctrl.Result{RequeueAfter: r.PollInterval}, nil
	}
	if err != nil {
		conditions.Set(h, metav1.Condition{Type: infrav1.BootPreparedCondition, Status: metav1.ConditionFalse, Reason: infrav1.BootPreparationFailedReason, Message: err.Error()})
		return ctrl.Result{}, fmt.Errorf("preparing the provisioning boot: %w", err)
	}
	conditions.Set(h, metav1.Condition{Type: infrav1.BootPreparedCondition, Status: metav1.ConditionTrue, Reason: infrav1.ReadyReason,
		Message: strings.TrimSuffix(fmt.Sprintf("%s boot prepared for %s %s; %s", c.BootMethod, c.Consumer.Kind, c.Consumer.Name, prepared), "; ")})
	// Record the boot before sending it: once this is stored, the host is never powered off and
	// booted again for this claim, whatever happens to the power-on request's answer.
	now := metav1.Now()
	h.Status.BootIssuedAt = &now
	r.event(h, "Provisioning", "Provision", "booting %s for %s %s", c.BootMethod, c.Consumer.Kind, c.Consumer.Name)
	if err := s.store(); err != nil {
		return ctrl.Result{}, err // not known to be stored: no power-on this round
	}
	// What changed while the boot was prepared (the claim released, a reboot request, a pause,
	// a deletion) comes before the power-on: the next round, which the change wakes, sees it.
	if wanted, err := r.bootStillWanted(ctx, h); err != nil || !wanted {
		return ctrl.Result{RequeueAfter: r.PollInterval}, err
	}
	return r.powerOnOnce(ctx, s) // the power state was read this round: off
}

// prepareBoot attaches what the claim's boot needs and sets the boot override to it, from its seed
// Secret sec: the provisioning boot, and every later power-on of a live image. Each step is safe
// to repeat (media already inserted are left as they are). It returns what it said of the seed
// for the BootPrepared condition; bmc.ErrNoSeedSlot when the BMC has no device for the seed.
func (r *Reconciler) prepareBoot(ctx context.Context, s *scope, sec *corev1.Secret) (string, error) {
	h, c := s.host, s.host.Status.Claim
	token := string(sec.Data[seed.KeyToken])
	image := seed.ImageURL(r.SeedBaseURL, h.Namespace, c.Consumer.Name, token)
	volume := seed.CIDataURL(r.SeedBaseURL, h.Namespace, c.Consumer.Name, token)
	switch {
	case c.Image.EffectiveFormat().InstallsToDisk():
		// The image is on the root drive: the deploy media leave, the seed volume (label cidata)
		// goes into a device of its own, and the host boots once from its drive.
		if err := s.bmc.EjectMedia(ctx, ""); err != nil {
			return "", err
		}
		if err := s.bmc.InsertMedia(ctx, "", volume); err != nil {
			return "", err
		}
		return "booting drive " + deviceName(c.RootDevice) + ", the seed volume in the BMC's virtual media", s.bmc.SetBootOverride(ctx, bmc.BootOverride{Target: bmc.BootHdd})
	case c.BootMethod == infrav1.BootMethodPXE:
		return "", s.bmc.SetBootOverride(ctx, bmc.BootOverride{Target: bmc.BootPxe})
	case c.BootMethod == infrav1.BootMethodUefiHTTP:
		// The firmware loads the OS image from the boot URI; the seed volume goes into the BMC's
		// virtual media (any one device), where a stock image finds it by its label.
		if err := s.bmc.InsertMedia(ctx, "", volume); err != nil {
			return "", err
		}
		return "the seed volume in the BMC's virtual media", s.bmc.SetBootOverride(ctx, bmc.BootOverride{Target: bmc.BootUefiHTTP, HTTPBootURI: image})
	}
	// The OS image in the CD, the per-claim NoCloud volume (label cidata) in a second device: a
	// prebuilt image finds its seed by the volume label, knowing no URL.
	if err := s.bmc.InsertMedia(ctx, image, volume); err != nil {
		return "", err
	}
	return "", s.bmc.SetBootOverride(ctx, bmc.BootOverride{Target: bmc.BootCd})
}

// noSeedSlotMessage says why a BMC without a device for the seed volume cannot boot the claim.
func noSeedSlotMessage(c *infrav1.HostClaim) string {
	if c.BootMethod == infrav1.BootMethodUefiHTTP {
		return "This BMC offers no virtual media device for the seed volume a UefiHttp boot needs. Boot this host by PXE (bootMethod), which carries the seed URL on the kernel command line"
	}
	return "This BMC offers a single virtual media device: the OS image and the seed volume cannot both be attached. Boot this host by PXE or UefiHttp (bootMethod), which carry the seed URL instead"
}

// prepareLiveBoot makes the power-on of a provisioned live host (after a reboot remediation, an
// operator's reboot request, or found off) boot its image with its seed again, whatever the BMC
// held since (a BIOS setup boot, an operator's media). In two rounds:
//   - the boot is recorded first: the seed gets a new token (one read earlier, from the BMC's
//     media settings or a PXE node's command line, fetches nothing any more) and
//     status.liveBootIssuedAt is stored, which opens the seed server's window for it before any
//     medium names it (a BMC may fetch an image when it is inserted);
//   - the next round (the status change wakes it) attaches the media and sets the override as for
//     the provisioning boot, reads the host again from the API server, and lets the power-on go.
//
// False (with the result to return) when the power-on must not be sent this round.
func (r *Reconciler) prepareLiveBoot(ctx context.Context, s *scope) (ctrl.Result, bool, error) {
	h, c := s.host, s.host.Status.Claim
	if v, ok := r.lastReset.Load(client.ObjectKeyFromObject(h)); ok {
		if last := v.(sentReset); last.t == bmc.ResetOn && r.now().Sub(last.at) < r.PollInterval {
			return ctrl.Result{}, true, nil // powered on moments ago (the BMC may still say Off): prepared then
		}
	}
	if running, err := r.jobRunning(ctx, h, "power-on"); err != nil || running {
		return ctrl.Result{RequeueAfter: r.CheckInterval}, false, err // the job's end wakes the host
	}
	sec := &corev1.Secret{}
	if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: h.Namespace, Name: seed.SecretName(c.Consumer.Name)}, sec); err != nil {
		if !apierrors.IsNotFound(err) {
			return ctrl.Result{}, false, err
		}
		// A machine being deleted removes its seed before it releases the host: no power-on
		// then. Otherwise the node was provisioned by an earlier release, which deleted the seed
		// once the Node joined: powered on with whatever the BMC holds, as then.
		if deleting, err := r.consumerGoing(ctx, h); err != nil || deleting {
			return ctrl.Result{RequeueAfter: r.PollInterval}, false, err
		}
		r.event(h, "LiveBootWithoutSeed", "Power", "no seed to boot the live image of %s %s with (provisioned before live images kept it, or deleted): powering on with what the BMC holds", c.Consumer.Kind, c.Consumer.Name)
		return ctrl.Result{}, true, nil
	}
	if at := h.Status.LiveBootIssuedAt; at == nil || r.now().Sub(at.Time) > seed.LiveBootWindow/2 {
		// No boot recorded, or one whose window is half gone: a new one, recorded before any
		// medium or override names the seed.
		token, err := seed.NewToken()
		if err != nil {
			return ctrl.Result{}, false, err
		}
		before := sec.DeepCopy()
		sec.Data[seed.KeyToken] = []byte(token)
		if err := r.Client.Patch(ctx, sec, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
			return ctrl.Result{}, false, fmt.Errorf("renewing the live seed's token: %w", err)
		}
		now := metav1.NewTime(r.now())
		h.Status.LiveBootIssuedAt = &now
		if err := s.store(); err != nil {
			h.Status.LiveBootIssuedAt = at // not known to be stored: not written by the round's closing write either
			return ctrl.Result{}, false, err
		}
		return ctrl.Result{RequeueAfter: r.PollInterval}, false, nil // the status change wakes the next round
	}
	_, err := r.prepareBoot(ctx, s, sec)
	switch {
	case errors.Is(err, bmc.ErrConflict):
		return ctrl.Result{RequeueAfter: r.PollInterval}, false, nil
	case errors.Is(err, bmc.ErrNoSeedSlot):
		conditions.Set(h, metav1.Condition{Type: infrav1.BootPreparedCondition, Status: metav1.ConditionFalse, Reason: infrav1.NoSeedMediaSlotReason, Message: noSeedSlotMessage(c)})
		return ctrl.Result{RequeueAfter: r.RetryInterval}, false, nil
	case err != nil:
		conditions.Set(h, metav1.Condition{Type: infrav1.BootPreparedCondition, Status: metav1.ConditionFalse, Reason: infrav1.BootPreparationFailedReason,
			Message: "preparing the live image's boot before powering on: " + err.Error()})
		return ctrl.Result{}, false, fmt.Errorf("preparing the live image's boot: %w", err)
	}
	conditions.Set(h, metav1.Condition{Type: infrav1.BootPreparedCondition, Status: metav1.ConditionTrue, Reason: infrav1.ReadyReason,
		Message: fmt.Sprintf("%s boot of the live image prepared again for %s %s", c.BootMethod, c.Consumer.Kind, c.Consumer.Name)})
	// What changed while the boot was prepared (a release, a reboot request, a pause, a deletion)
	// comes before the power-on: the next round, which the change wakes, sees it.
	if wanted, err := r.bootStillWanted(ctx, h); err != nil || !wanted {
		return ctrl.Result{RequeueAfter: r.PollInterval}, false, err
	}
	return ctrl.Result{}, true, nil
}

// endLiveBoot ejects the media of a live boot whose window has closed (the host is on: the image
// booted or never will): the seed server no longer serves them, and the BMC holds no URL with the
// token any more.
func (r *Reconciler) endLiveBoot(ctx context.Context, s *scope) error {
	h, c := s.host, s.host.Status.Claim
	at := h.Status.LiveBootIssuedAt
	if at == nil || s.power != bmc.PowerOn || r.now().Sub(at.Time) < seed.LiveBootWindow {
		return nil
	}
	if c.BootMethod != infrav1.BootMethodPXE {
		if err := s.bmc.EjectMedia(ctx, r.seedMediaMatch(h)); err != nil {
			return err
		}
	}
	h.Status.LiveBootIssuedAt = nil
	return nil
}

// consumerGoing reads the claim's RedfishMachine from the API server: true when it is gone or
// being deleted.
func (r *Reconciler) consumerGoing(ctx context.Context, h *infrav1.RedfishHost) (bool, error) {
	c := h.Status.Claim
	rm := &infrav1.RedfishMachine{}
	if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: h.Namespace, Name: c.Consumer.Name}, rm); err != nil {
		return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	}
	return !rm.DeletionTimestamp.IsZero(), nil
}

// bootStillWanted reads h from the API server: true while its claim is the one the boot was
// prepared for, not released, and nothing holds the power off.
func (r *Reconciler) bootStillWanted(ctx context.Context, h *infrav1.RedfishHost) (bool, error) {
	now := &infrav1.RedfishHost{}
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(h), now); err != nil {
		return false, client.IgnoreNotFound(err)
	}
	c := now.Status.Claim
	return c != nil && c.ConsumerUID == h.Status.Claim.ConsumerUID && !c.Release && len(now.Spec.RebootRequests) == 0 &&
		!annotations.HasPaused(now) && now.DeletionTimestamp.IsZero(), nil
}

// requestors says who holds the host's power off.
func requestors(h *infrav1.RedfishHost) string {
	names := make([]string, 0, len(h.Spec.RebootRequests))
	for _, q := range h.Spec.RebootRequests {
		names = append(names, q.Requestor)
	}
	return "reboot requests of " + strings.Join(names, ", ") + " hold the power off"
}

// powerOnOnce sends the provisioning power-on recorded in status.bootIssuedAt, resuming from the
// BMC's power state: only a server that is off gets it, so a power-on whose answer was lost
// (the server is on) is never followed by another one, nor by a power-off.
func (r *Reconciler) powerOnOnce(ctx context.Context, s *scope) (ctrl.Result, error) {
	if s.power != bmc.PowerOff {
		return ctrl.Result{RequeueAfter: r.CheckInterval}, nil // booted (or booting): the consumer marks the claim provisioned
	}
	if err := r.reset(ctx, s, bmc.ResetOn); err != nil {
		// Not known to have reached the BMC, or refused: the next round reads the power again.
		return ctrl.Result{RequeueAfter: r.PollInterval}, ignoreConflict(err)
	}
	return ctrl.Result{RequeueAfter: r.PollInterval}, nil
}

func (r *Reconciler) provisioned(ctx context.Context, s *scope) (ctrl.Result, error) {
	h, c := s.host, s.host.Status.Claim
	if c == nil || c.Release {
		// The power-off follows in this round: the state is written with the round's status;
		// unless a RedfishJob uses the BMC (one in a maintenance), read from the API server: a
		// job started just before the release may not be in the cache yet. Its end wakes the host.
		if running, err := r.jobRunningNow(ctx, h, claimWork(c)); err != nil || running {
			return ctrl.Result{RequeueAfter: r.CheckInterval}, err
		}
		h.Status.State = infrav1.HostStateDeprovisioning
		return r.deprovision(ctx, s)
	}
	if res, ok := r.connectOrWait(ctx, s); !ok {
		return res, nil
	}
	if handled, res, err := r.serviceBoot(ctx, s); handled || err != nil {
		return res, err
	}
	// A provisioned host stays on, except while reboot requests (remediation, maintenance) hold it off.
	on := len(h.Spec.RebootRequests) == 0
	if !c.Image.EffectiveFormat().InstallsToDisk() {
		if on && s.power == bmc.PowerOff {
			if res, ok, err := r.prepareLiveBoot(ctx, s); !ok || err != nil {
				return res, err
			}
		}
		if err := r.endLiveBoot(ctx, s); err != nil {
			return ctrl.Result{}, err
		}
	}
	if err := r.keepPower(ctx, s, &on); err != nil {
		return ctrl.Result{}, err
	}
	if (on && h.Status.PowerState == string(bmc.PowerOn)) || (!on && h.Status.PowerState == string(bmc.PowerOff)) {
		// Settled. Held off, it waits for the reboot requests to go: a spec change wakes it.
		return ctrl.Result{RequeueAfter: r.CheckInterval}, nil
	}
	return ctrl.Result{RequeueAfter: r.PollInterval}, nil // in transition: followTransition backs off
}

func (r *Reconciler) deprovision(ctx context.Context, s *scope) (ctrl.Result, error) {
	h := s.host
	if res, ok := r.connectOrWait(ctx, s); !ok {
		return res, nil
	}
	if ps := s.power; ps != bmc.PowerOff {
		return ctrl.Result{RequeueAfter: r.PollInterval}, ignoreConflict(r.reset(ctx, s, bmc.ResetForceOff))
	}
	if err := s.bmc.EjectMedia(ctx, r.seedMediaMatch(h)); err != nil {
		return ctrl.Result{}, err
	}
	if h.Status.Install != nil && h.Status.BootIssuedAt == nil {
		// An install whose drive was not booted yet (failed, aborted, or released between its
		// report and the drive boot): the deploy image (or installer) leaves, whatever URL it was
		// booted from, and the Continuous boot override to it with it, before anything else
		// powers the host on. A claimed host holds no one else's media.
		if err := s.bmc.EjectMedia(ctx, ""); err != nil {
			return ctrl.Result{}, err
		}
		switch err := s.bmc.SetBootOverride(ctx, bmc.BootOverride{Target: bmc.BootNone}); {
		case errors.Is(err, bmc.ErrNotSupported) || errors.Is(err, bmc.ErrRefused):
			// The media are out: a CD override now boots nothing. Said, and the release goes on.
			r.event(h, "BootOverrideKept", "Release", "the BMC refused clearing the boot override to the ejected deploy image (%s); it boots nothing now", err.Error())
		case err != nil:
			return ctrl.Result{RequeueAfter: r.PollInterval}, ignoreConflict(err)
		}
	}
	h.Status.BootIssuedAt, h.Status.LiveBootIssuedAt, h.Status.SoftPowerOffSentAt, h.Status.Install = nil, nil, nil, nil
	// Cleaning is skipped only when the claim says so: a claim that is missing fails closed.
	if c := h.Status.Claim; c == nil || c.AutomatedCleaningMode != infrav1.CleaningModeDisabled {
		// The erase starts in this round (an erase is safe to repeat, should the round's write
		// of the state fail).
		h.Status.State = infrav1.HostStateCleaning
		return r.clean(ctx, s)
	}
	r.release(h)
	return ctrl.Result{}, nil // the status change wakes the next state
}

// clean erases every drive and releases the host only once each erase completed. Erases run on
// the BMC (minutes to hours on real drives); their task monitors are recorded in status.erase
// and read each round, never waited on in a worker. A host with nothing Redfish can erase stays
// Cleaning with a condition that says so: it is never released un-erased.
func (r *Reconciler) clean(ctx context.Context, s *scope) (ctrl.Result, error) {
	if res, ok := r.connectOrWait(ctx, s); !ok {
		return res, nil
	}
	h := s.host
	cleaned := func(status metav1.ConditionStatus, reason, format string, args ...any) {
		conditions.Set(h, metav1.Condition{Type: infrav1.CleanedCondition, Status: status, Reason: reason, Message: fmt.Sprintf(format, args...)})
	}
	if h.Status.Erase == nil {
		var expected []string // the serials inspection recorded: each must be listed now
		if inv := h.Status.Inventory; inv != nil {
			for _, d := range inv.Drives {
				expected = append(expected, d.SerialNumber)
			}
		}
		jobs, err := s.bmc.EraseDrives(ctx, h.Spec.UnerasedDrivesAccepted, expected)
		switch {
		case errors.Is(err, bmc.ErrDrivesMissing):
			cleaned(metav1.ConditionFalse, infrav1.DrivesMissingReason,
				"Not released: %s. The BMC may be listing its drives partly (retried); a drive taken out of the server is listed by serial in spec.unerasedDrivesAccepted", err)
			return ctrl.Result{RequeueAfter: r.RetryInterval}, nil
		case errors.Is(err, bmc.ErrDrivesNotErasable):
			cleaned(metav1.ConditionFalse, infrav1.DrivesNotErasableReason,
				"Not released: %s. Erase those drives out of band and list them in spec.unerasedDrivesAccepted, or cordon the host", err)
			return ctrl.Result{RequeueAfter: r.RetryInterval}, nil
		case errors.Is(err, bmc.ErrNothingToErase):
			cleaned(metav1.ConditionFalse, infrav1.NothingToEraseReason,
				"Cannot clean through this BMC (%s); the host stays out of the pool. Erase it out of band, then list its drives' serials in spec.unerasedDrivesAccepted (or delete and register the RedfishHost again); or provision it with automatedCleaningMode: Disabled", err)
			return ctrl.Result{RequeueAfter: r.RetryInterval}, nil
		case err != nil:
			cleaned(metav1.ConditionFalse, infrav1.EraseFailedReason, "Starting the erase failed, retrying: %s", err)
			return ctrl.Result{RequeueAfter: r.RetryInterval}, nil
		}
		h.Status.Erase = &infrav1.EraseStatus{StartedAt: metav1.Now()}
		for _, j := range jobs {
			h.Status.Erase.Drives = append(h.Status.Erase.Drives, j.Drive)
			if j.TaskURI != "" {
				h.Status.Erase.Tasks = append(h.Status.Erase.Tasks, j.TaskURI)
			}
		}
		cleaned(metav1.ConditionFalse, infrav1.ErasingReason, "Erasing %d drives", len(jobs))
		r.event(h, "Erasing", "Clean", "secure erase of %d drives started", len(jobs))
		return ctrl.Result{RequeueAfter: r.firstLook()}, nil
	}
	pending := h.Status.Erase.Tasks[:0:0]
	for _, uri := range h.Status.Erase.Tasks {
		st, err := s.bmc.TaskStatus(ctx, uri)
		switch {
		case err != nil:
			return ctrl.Result{}, fmt.Errorf("reading erase task %s: %w", uri, err)
		case st.Failed:
			// Start over: the drives are erased again (an erase is safe to repeat).
			h.Status.Erase = nil
			cleaned(metav1.ConditionFalse, infrav1.EraseFailedReason, "An erase ended %s (%s), starting over", st.State, st.Message)
			return ctrl.Result{RequeueAfter: r.RetryInterval}, nil
		case !st.Done:
			pending = append(pending, uri)
		}
	}
	if len(pending) > 0 {
		h.Status.Erase.Tasks = pending
		cleaned(metav1.ConditionFalse, infrav1.ErasingReason, "%d erases still running (started %s)", len(pending), h.Status.Erase.StartedAt.Format(time.RFC3339))
		return ctrl.Result{RequeueAfter: r.eraseLook(h.Status.Erase.StartedAt.Time)}, nil
	}
	// Every task ended (or there was none): the drives themselves must agree.
	h.Status.Erase.Tasks = nil
	if n, err := s.bmc.ErasesInProgress(ctx, h.Status.Erase.Drives); err != nil {
		return ctrl.Result{}, fmt.Errorf("verifying the erase: %w", err)
	} else if n > 0 {
		cleaned(metav1.ConditionFalse, infrav1.ErasingReason, "%d drives still report an erase in progress (started %s)", n, h.Status.Erase.StartedAt.Format(time.RFC3339))
		return ctrl.Result{RequeueAfter: r.eraseLook(h.Status.Erase.StartedAt.Time)}, nil
	}
	cleaned(metav1.ConditionTrue, infrav1.ErasedReason, "Every drive erased (started %s)", h.Status.Erase.StartedAt.Format(time.RFC3339))
	h.Status.Erase = nil
	r.event(h, "Cleaned", "Clean", "erased every drive")
	r.release(h)
	return ctrl.Result{}, nil // the status change wakes the next state
}

// seedMediaMatch is what the URLs of the media the seed server gave this host's claim contain:
// only those are ejected. Without a claim, anything the seed server serves.
func (r *Reconciler) seedMediaMatch(h *infrav1.RedfishHost) string {
	if c := h.Status.Claim; c != nil {
		return "/v1/" + h.Namespace + "/" + c.Consumer.Name + "/"
	}
	return r.SeedBaseURL
}

// release returns the host to the pool, reserved for the claim's owner when it asked for reuse.
func (r *Reconciler) release(h *infrav1.RedfishHost) {
	c := h.Status.Claim
	h.Status.ReservedFor = nil
	if c != nil && c.NodeReuse && c.Owner != nil {
		h.Status.ReservedFor = c.Owner.DeepCopy()
	}
	h.Status.Claim, h.Status.SoftPowerOffSentAt = nil, nil
	h.Status.State = infrav1.HostStateAvailable
	conditions.Delete(h, infrav1.BootPreparedCondition) // of the claim that ended
	if c != nil {
		r.event(h, "Released", "Release", "released by %s %s (reserved for owner: %t)", c.Consumer.Kind, c.Consumer.Name, h.Status.ReservedFor != nil)
	}
}
