package host

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/cluster-api/util/conditions"
	ctrl "sigs.k8s.io/controller-runtime"

	infrav1 "github.com/caprf/cluster-api-provider-redfish/api/v1alpha1"
	"github.com/caprf/cluster-api-provider-redfish/bmc"
	"github.com/caprf/cluster-api-provider-redfish/internal/install"
	"github.com/caprf/cluster-api-provider-redfish/internal/seed"
)

// installed says whether the claim's image is on the host's root drive (for an image that
// installs to disk; a live image never is).
func installed(h *infrav1.RedfishHost) bool {
	return h.Status.Install != nil && h.Status.Install.Phase == infrav1.InstallPhaseInstalled
}

// install puts the claim's image on the root drive before the host boots from it: a raw or qcow2
// image by the deploy image, which runs the script the seed server writes from the claim and
// reports; a self-installing ISO by itself, its power-off ending the install. The boot into the
// deploy image (or installer) is recorded before it is sent, and made once; the outcome is read
// from the report the deploy script sent (kept in the seed Secret) and from the power state. A
// failed, mismatching or timed-out install leaves the host off, never booting the drive.
func (r *Reconciler) install(ctx context.Context, s *scope, sec *corev1.Secret) (ctrl.Result, error) {
	h, c := s.host, s.host.Status.Claim
	format := c.Image.EffectiveFormat()
	in := h.Status.Install
	if in != nil && in.Phase == infrav1.InstallPhaseFailed {
		// Left off until the machine goes (a MachineHealthCheck, or its owner, replaces it).
		if s.power != bmc.PowerOff && s.power != bmc.PowerPoweringOff {
			return ctrl.Result{RequeueAfter: r.PollInterval}, ignoreConflict(r.reset(ctx, s, bmc.ResetForceOff))
		}
		return ctrl.Result{RequeueAfter: r.CheckInterval}, nil
	}
	if in == nil || in.BootIssuedAt == nil {
		return r.bootInstaller(ctx, s, sec, format)
	}
	if s.power == bmc.PowerOn || s.power == bmc.PowerPoweringOn {
		in.SawPowerOn = true
	}
	if report := sec.Data[seed.KeyInstallReport]; len(report) > 0 && format.DiskImage() {
		return r.installReported(ctx, s, report)
	}
	if r.now().Sub(in.BootIssuedAt.Time) > r.InstallTimeout {
		r.finishInstall(h, infrav1.InstallPhaseFailed, infrav1.InstallTimedOutReason,
			fmt.Sprintf("no outcome within %s of the boot into the %s; the drive is not booted", r.InstallTimeout, installerName(format)))
		return ctrl.Result{RequeueAfter: r.PollInterval}, nil
	}
	if in.PowerOnSentAt == nil && !in.SawPowerOn {
		// The boot was recorded by a round that stopped before its power-on (or the BMC refused
		// it): sent now, once. A host found on meanwhile is followed, never powered on again.
		if s.power != bmc.PowerOff {
			return ctrl.Result{RequeueAfter: r.PollInterval}, nil
		}
		return r.installPowerOn(ctx, s)
	}
	if s.power == bmc.PowerOff {
		switch {
		case in.SawPowerOn && format == infrav1.ImageFormatISO:
			// The installer powered the host off: its install ended.
			r.finishInstall(h, infrav1.InstallPhaseInstalled, infrav1.InstalledReason, "the installer wrote the drive and powered the host off")
			return ctrl.Result{}, nil
		case in.SawPowerOn:
			r.finishInstall(h, infrav1.InstallPhaseFailed, infrav1.InstallFailedReason,
				"the deploy image powered the host off without reporting an outcome (read the host's console); the drive is not booted")
			return ctrl.Result{}, nil
		case in.PowerOnSentAt != nil && r.now().Sub(in.PowerOnSentAt.Time) > installPowerOnGrace:
			// Never seen on: it did not come on, or ran and went off between two looks. The
			// power-on is not sent again (a second run of an installer is no one's decision).
			r.finishInstall(h, infrav1.InstallPhaseFailed, infrav1.InstallFailedReason, fmt.Sprintf(
				"the host was not seen on within %s of the power-on into the %s, and is off; it is not powered on again", installPowerOnGrace, installerName(format)))
			return ctrl.Result{}, nil
		}
	}
	return ctrl.Result{RequeueAfter: r.PollInterval}, nil
}

// installPowerOnGrace is how long a host may read off after the power-on into an installer was
// sent before its run is taken as ended without it.
const installPowerOnGrace = 3 * time.Minute

// installPowerOn records the power-on into the installer, then sends it: once. A refusal (the
// BMC busy, a 4xx, not sent) did nothing, so it is sent again next round.
func (r *Reconciler) installPowerOn(ctx context.Context, s *scope) (ctrl.Result, error) {
	in := s.host.Status.Install
	now := metav1.NewTime(r.now())
	in.PowerOnSentAt = &now
	if err := s.store(); err != nil {
		in.PowerOnSentAt = nil // not sent: the round's closing write must not say it was
		return ctrl.Result{}, err
	}
	err := r.reset(ctx, s, bmc.ResetOn)
	if errors.Is(err, bmc.ErrConflict) || errors.Is(err, bmc.ErrRefused) || errors.Is(err, bmc.ErrNotSent) {
		in.PowerOnSentAt = nil
		return ctrl.Result{RequeueAfter: r.PollInterval}, nil
	}
	return ctrl.Result{RequeueAfter: r.PollInterval}, err
}

// bootInstaller attaches the deploy image (or the self-installing ISO) with its seed volume and
// powers the host on into it, once.
func (r *Reconciler) bootInstaller(ctx context.Context, s *scope, sec *corev1.Secret, format infrav1.ImageFormat) (ctrl.Result, error) {
	h, c := s.host, s.host.Status.Claim
	if format.DiskImage() && r.DeployImageURL == "" {
		conditions.Set(h, metav1.Condition{Type: infrav1.ImageInstalledCondition, Status: metav1.ConditionFalse, Reason: infrav1.NoDeployImageReason,
			Message: fmt.Sprintf("a %s image is written to the drive by the deploy image, and the manager names none (--deploy-image-url)", format)})
		return ctrl.Result{RequeueAfter: r.RetryInterval}, nil
	}
	if c.RootDevice == nil {
		conditions.Set(h, metav1.Condition{Type: infrav1.ImageInstalledCondition, Status: metav1.ConditionFalse, Reason: infrav1.NoMatchingDriveReason,
			Message: "the claim names no root drive to install to"})
		return ctrl.Result{RequeueAfter: r.RetryInterval}, nil
	}
	if s.power != bmc.PowerOff {
		return ctrl.Result{RequeueAfter: r.PollInterval}, ignoreConflict(r.reset(ctx, s, bmc.ResetForceOff))
	}
	token := string(sec.Data[seed.KeyToken])
	image, volume := r.DeployImageURL, seed.DeployVolumeURL(r.SeedBaseURL, h.Namespace, c.Consumer.Name, token)
	if format == infrav1.ImageFormatISO {
		image, volume = seed.ImageURL(r.SeedBaseURL, h.Namespace, c.Consumer.Name, token), seed.CIDataURL(r.SeedBaseURL, h.Namespace, c.Consumer.Name, token)
	}
	err := s.bmc.InsertMedia(ctx, image, volume)
	if err == nil {
		// The deploy image stays the boot target until the drive is booted on purpose: a reboot
		// meanwhile (a panic, a watchdog, a power cycle at the PDU) runs it again, never the
		// half-written drive. A self-installing ISO boots once: installers reboot into the drive.
		err = s.bmc.SetBootOverride(ctx, bmc.BootOverride{Target: bmc.BootCd, Continuous: format.DiskImage()})
	}
	switch {
	case errors.Is(err, bmc.ErrNoSeedSlot):
		conditions.Set(h, metav1.Condition{Type: infrav1.ImageInstalledCondition, Status: metav1.ConditionFalse, Reason: infrav1.NoSeedMediaSlotReason,
			Message: "This BMC offers a single virtual media device: the " + installerName(format) + " and its seed volume cannot both be attached"})
		return ctrl.Result{RequeueAfter: r.RetryInterval}, nil
	case errors.Is(err, bmc.ErrConflict):
		conditions.Set(h, metav1.Condition{Type: infrav1.ImageInstalledCondition, Status: metav1.ConditionFalse, Reason: infrav1.BMCBusyReason, Message: err.Error()})
		return ctrl.Result{RequeueAfter: r.PollInterval}, nil
	case err != nil:
		conditions.Set(h, metav1.Condition{Type: infrav1.ImageInstalledCondition, Status: metav1.ConditionFalse, Reason: infrav1.BootPreparationFailedReason, Message: err.Error()})
		return ctrl.Result{}, fmt.Errorf("preparing the boot into the %s: %w", installerName(format), err)
	}
	now := metav1.NewTime(r.now())
	h.Status.Install = &infrav1.InstallStatus{Phase: infrav1.InstallPhaseInstalling, BootIssuedAt: &now, Device: deviceName(c.RootDevice)}
	conditions.Set(h, metav1.Condition{Type: infrav1.ImageInstalledCondition, Status: metav1.ConditionFalse, Reason: infrav1.InstallingReason,
		Message: fmt.Sprintf("the %s writes %s to drive %s", installerName(format), format, deviceName(c.RootDevice))})
	r.event(h, "Installing", "Install", "booting the %s to write the %s image of %s %s to drive %s", installerName(format), format, c.Consumer.Kind, c.Consumer.Name, deviceName(c.RootDevice))
	// Recorded before the power-on is sent: the installer is booted once for this claim.
	if err := s.store(); err != nil {
		return ctrl.Result{}, err
	}
	if wanted, err := r.bootStillWanted(ctx, h); err != nil || !wanted {
		return ctrl.Result{RequeueAfter: r.PollInterval}, err
	}
	return r.installPowerOn(ctx, s)
}

// installReported records the deploy script's report: Installed when it wrote the drive and the
// digest it computed is the one the machine gave, Failed otherwise.
func (r *Reconciler) installReported(ctx context.Context, s *scope, data []byte) (ctrl.Result, error) {
	h, c := s.host, s.host.Status.Claim
	rep, err := install.ParseReport(data)
	received, terr := time.Parse(time.RFC3339Nano, rep.ReceivedAt)
	switch {
	case err != nil:
		r.finishInstall(h, infrav1.InstallPhaseFailed, infrav1.InstallFailedReason, err.Error())
	case h.Status.Install.PowerOnSentAt == nil && !h.Status.Install.SawPowerOn,
		terr != nil || received.Before(h.Status.Install.BootIssuedAt.Add(-time.Second)):
		// Not this boot's (sent before the deploy image was powered on: a token read off the
		// BMC by someone, a clock gone wrong): the drive's content is unknown, so it is not booted.
		r.finishInstall(h, infrav1.InstallPhaseFailed, infrav1.InstallFailedReason, fmt.Sprintf(
			"an install report came before the deploy image was powered on (received %q); the drive is not booted", rep.ReceivedAt))
	case !rep.OK && rep.Reason == infrav1.ChecksumMismatchReason && install.ValidDigest(rep.Checksum, c.Image.EffectiveChecksumType()):
		// Said from the digests (not secrets), which a redaction of the script's text would hide.
		want := "the one its checksum file gives"
		if !install.IsChecksumURL(c.Image.Checksum) {
			want = c.Image.Checksum
		}
		r.finishInstall(h, infrav1.InstallPhaseFailed, infrav1.ChecksumMismatchReason, fmt.Sprintf(
			"the image %s downloaded by the deploy image has %s %s, not %s; the drive was wiped and is not booted",
			imageFile(c.Image.URL), c.Image.EffectiveChecksumType(), strings.ToLower(rep.Checksum), want))
	case !rep.OK:
		reason := rep.Reason
		if reason != infrav1.ChecksumMismatchReason && reason != infrav1.ImageFormatMismatchReason {
			reason = infrav1.InstallFailedReason
		}
		r.finishInstall(h, infrav1.InstallPhaseFailed, reason, bmc.Redact(fmt.Sprintf("the deploy image reports: %s; the drive is not booted", rep.Message)))
	case !install.ValidDigest(rep.Checksum, c.Image.EffectiveChecksumType()) || (!install.IsChecksumURL(c.Image.Checksum) && !equalFoldHex(rep.Checksum, c.Image.Checksum)):
		r.finishInstall(h, infrav1.InstallPhaseFailed, infrav1.ChecksumMismatchReason,
			fmt.Sprintf("the deploy image reports checksum %.130q written, not the machine's %s", rep.Checksum, c.Image.Checksum))
	default:
		h.Status.Install.SizeBytes, h.Status.Install.Checksum = rep.SizeBytes, strings.ToLower(rep.Checksum)
		r.finishInstall(h, infrav1.InstallPhaseInstalled, infrav1.InstalledReason,
			fmt.Sprintf("%d bytes written to %s, %s verified", rep.SizeBytes, bmc.Redact(rep.Device), c.Image.EffectiveChecksumType()))
	}
	if h.Status.Install.Phase == infrav1.InstallPhaseFailed && s.power != bmc.PowerOff {
		return ctrl.Result{RequeueAfter: r.PollInterval}, ignoreConflict(r.reset(ctx, s, bmc.ResetForceOff))
	}
	return ctrl.Result{}, nil // the status change wakes the next round
}

// finishInstall ends the installation with phase, said in the ImageInstalled condition and an event.
func (r *Reconciler) finishInstall(h *infrav1.RedfishHost, phase infrav1.InstallPhase, reason, message string) {
	now := metav1.NewTime(r.now())
	h.Status.Install.Phase, h.Status.Install.FinishedAt = phase, &now
	status, kind := metav1.ConditionTrue, "Installed"
	if phase == infrav1.InstallPhaseFailed {
		status, kind = metav1.ConditionFalse, "InstallFailed"
		h.Status.Install.Message = message
	}
	conditions.Set(h, metav1.Condition{Type: infrav1.ImageInstalledCondition, Status: status, Reason: reason, Message: message})
	r.event(h, kind, "Install", "%s", message)
}

func installerName(f infrav1.ImageFormat) string {
	if f == infrav1.ImageFormatISO {
		return "installer ISO"
	}
	return "deploy image"
}

func deviceName(d *infrav1.RootDevice) string {
	switch {
	case d == nil:
		return ""
	case d.WWN != "":
		return d.Name + " (wwn " + d.WWN + ")"
	}
	return d.Name + " (serial " + d.SerialNumber + ")"
}

// imageFile is the file name of an image URL, without its query (which may hold credentials).
func imageFile(u string) string {
	if i := strings.IndexAny(u, "?#"); i >= 0 {
		u = u[:i]
	}
	return bmc.Redact(u[strings.LastIndex(u, "/")+1:])
}

func equalFoldHex(a, b string) bool { return a != "" && strings.EqualFold(a, b) }
